"""Settings guards, the deploy check and the names pinned in rtcagent.keys."""

from __future__ import annotations

import secrets
import subprocess
import sys

import pytest
from django.test import Client

from rtcagent import keys
from tests.livesrv import ROOT, child_env


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = child_env()
    for name in ("DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "REDIS_URL", "DJANGO_DEBUG",
                 "DJANGO_ALLOW_ASYNC_UNSAFE"):
        base.pop(name, None)
    base.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=base,
        capture_output=True, text=True, timeout=120,
    )


def test_production_refuses_to_start_without_secret_hosts_and_redis() -> None:
    result = _manage("check", DJANGO_DEBUG="False")
    assert result.returncode != 0
    assert (
        "DJANGO_DEBUG is off, so these must be set: DJANGO_SECRET_KEY, DJANGO_ALLOWED_HOSTS, "
        "REDIS_URL"
    ) in result.stderr


def test_check_deploy_is_clean_under_production_settings(settings) -> None:
    result = _manage(
        "check", "--deploy", "--fail-level", "WARNING",
        DJANGO_DEBUG="False",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="agent.example.com",
        REDIS_URL=settings.REDIS_URL,
    )
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_channel_and_key_names_are_pinned(settings) -> None:
    assert keys.topic_channel(7) == "topic:u=7"
    assert keys.live_channel(7) == "live:u=7"
    # pub/sub is the whole server's, not a database's: the database is in the name
    settings.REDIS_URL = "redis://127.0.0.1:6379/5"
    assert keys.live_bus(7) == "rtc:db5:live:{7}"
    assert keys.live_interrupts() == "rtc:db5:live:interrupts"
    settings.REDIS_URL = "unix:///var/run/valkey.sock?db=3"
    assert keys.live_bus(7) == "rtc:db3:live:{7}"
    settings.REDIS_URL = "redis://127.0.0.1:6379"
    assert keys.live_bus(7) == "rtc:db0:live:{7}"
    assert keys.topic_epoch(7) == "rtc:topic:{7}:epoch"
    assert keys.topic_offset(7) == "rtc:topic:{7}:offset"
    assert keys.topic_pending(7) == "rtc:topic:{7}:pending"
    # Context, compaction and memory state of running sessions: renaming strands it.
    assert keys.context_state("s-1") == "rtc:ctx:{s-1}"
    assert keys.compaction_pending("s-1") == "rtc:compact:{s-1}"
    assert (keys.MEMORY_JOBS_PENDING, keys.MEMORY_JOBS_RUNNING) == (
        "rtc:mem:x:pending", "rtc:mem:x:running")
    assert keys.memory_job_lock("s-1") == "rtc:mem:x:{s-1}:lock"


@pytest.mark.django_db
def test_health_endpoints_report_the_real_services() -> None:
    client = Client()
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ok", "database": "ok", "redis": "ok", "objects": "ok"}


def test_production_refuses_a_generated_jwt_key() -> None:
    base = {"DJANGO_DEBUG": "False", "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "agent.example.com", "REDIS_URL": "redis://127.0.0.1:1/0"}
    env = child_env(**base)
    env.pop("RTC_JWT_KEY_DIR")
    env.pop("RTC_JWT_PRIVATE_KEY", None)
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "set RTC_JWT_PRIVATE_KEY (a PEM) or RTC_JWT_KEY_DIR" in result.stderr


def test_rediss_urls_take_the_certificate_policy() -> None:
    code = "from django.conf import settings; print(settings.REDIS_URL)"
    env = child_env(REDIS_URL="rediss://:pw@redis.example.com:6380/0",
                    RTC_REDIS_SSL_CERT_REQS="none")
    result = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "rediss://:pw@redis.example.com:6380/0?ssl_cert_reqs=none"
    import redis

    pool = redis.ConnectionPool.from_url(result.stdout.strip())
    assert pool.connection_kwargs["ssl_cert_reqs"] == "none"


def test_json_lists_come_from_the_environment() -> None:
    code = ("from django.conf import settings as s; "
            "print(s.RTC_OAUTH_PROVIDERS[0]['name'], s.RTC_TRUSTED_ISSUERS[0]['issuer'])")
    env = child_env(RTC_OAUTH_PROVIDERS='[{"name": "kc"}]',
                    RTC_TRUSTED_ISSUERS='[{"issuer": "https://idp.example.com"}]')
    result = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["kc", "https://idp.example.com"], result.stderr
