"""Channels registered by plugins and the live calls (rtchild agents) that read and write them.

A ``Channel`` is a name a client registered for the user (``v1.channel.register``): an input the
client feeds (``in``) or an output it plays (``out``); only channels declared ``realtime`` can
carry a call. A ``LiveCall`` is one rtchild: a child session of the session whose agent created
it (``rt_children``), reading one ``in`` channel and speaking on one ``out`` channel, until it is
stopped. Stopped calls stay, with their sessions, as the transcript the parent pages through.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

NAME_MAX = 64


class Direction(models.TextChoices):
    IN = "in", "input"
    OUT = "out", "output"


class Channel(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="live_channels")
    # None: usable from any of the user's sessions; else only from this one
    session = models.ForeignKey("agent_sessions.Session", null=True, blank=True,
                                on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=NAME_MAX)
    direction = models.CharField(max_length=3, choices=Direction.choices)
    realtime = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="channel_user_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.direction}{', rt' if self.realtime else ''})"


class LiveStatus(models.TextChoices):
    RUNNING = "running"
    STOPPED = "stopped"


class LiveCall(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="live_calls")
    parent_session = models.ForeignKey("agent_sessions.Session", on_delete=models.CASCADE,
                                       related_name="live_calls")
    # the rtchild's own session: its messages are the call's transcript
    session = models.OneToOneField("agent_sessions.Session", on_delete=models.CASCADE,
                                   related_name="live_call")
    # the parent's rt_children call that created it: one call per tool call, after a crash too
    call_message = models.OneToOneField("agent_sessions.Message", null=True, blank=True,
                                        on_delete=models.SET_NULL, related_name="+")
    title = models.CharField(max_length=255, blank=True, default="")
    instruction = models.TextField(blank=True, default="")
    input_channel = models.CharField(max_length=NAME_MAX)
    output_channel = models.CharField(max_length=NAME_MAX)
    status = models.CharField(max_length=8, choices=LiveStatus.choices,
                              default=LiveStatus.RUNNING)
    stop_reason = models.CharField(max_length=255, blank=True, default="")
    inputs = models.PositiveIntegerField(default=0)  # inputs delivered
    interruptions = models.PositiveIntegerField(default=0)  # inputs that cut a running turn
    created_at = models.DateTimeField(auto_now_add=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # a channel feeds, or is spoken on by, one running call at a time
            models.UniqueConstraint(fields=["user", "input_channel"],
                                    condition=models.Q(status="running"),
                                    name="livecall_running_input"),
            models.UniqueConstraint(fields=["user", "output_channel"],
                                    condition=models.Q(status="running"),
                                    name="livecall_running_output"),
        ]
        indexes = [models.Index(fields=["parent_session", "-created_at"],
                                name="livecall_parent_recent")]

    def __str__(self) -> str:
        return f"{self.title or 'live call'} ({self.status})"
