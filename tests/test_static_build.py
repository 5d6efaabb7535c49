"""The production static build (the release phase's ``collectstatic``) and pages served from it."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.livesrv import ROOT, child_env

WIDGET = "rtc-agent/rtc-agent.js"
VENDORED = (
    "rtc-agent/vendor/centrifuge.mjs",
    "rtc-agent/vendor/marked.esm.js",
    "rtc-agent/vendor/purify.es.mjs",
)


@pytest.fixture(scope="module")
def static_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``collectstatic`` once, under ``DJANGO_DEBUG=False`` (the manifest storage), into a
    temporary STATIC_ROOT; the settings module only moves STATIC_ROOT."""
    base = tmp_path_factory.mktemp("static-build")
    root = base / "staticfiles"
    (base / "static_build_settings.py").write_text(
        f"from rtcagent.settings import *  # noqa: F403\nSTATIC_ROOT = {str(root)!r}\n"
    )
    env = child_env(
        DJANGO_DEBUG="False",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="agent.example.com",
        DJANGO_SETTINGS_MODULE="static_build_settings",
        PYTHONPATH=f"{base}:{ROOT}",
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return root


def _manifest(static_root: Path) -> dict[str, str]:
    return json.loads((static_root / "staticfiles.json").read_text())["paths"]


def test_collectstatic_succeeds_under_production_settings(static_root: Path) -> None:
    paths = _manifest(static_root)
    for name in (WIDGET, *VENDORED):
        assert name in paths, name
        assert paths[name] != name  # hashed, so it can be cached forever
        assert (static_root / paths[name]).is_file()


def test_every_source_map_a_vendored_file_names_is_served(static_root: Path) -> None:
    paths = _manifest(static_root)
    named = {}
    for name in VENDORED:
        built = static_root / paths[name]
        tail = built.read_text().rstrip().rsplit("\n", 1)[-1]
        if tail.startswith("//# sourceMappingURL="):
            named[name] = tail.removeprefix("//# sourceMappingURL=")
            assert (built.parent / named[name]).is_file(), named[name]
    # Django rewrites the reference of a .js file to the hashed map (.mjs files are left as is).
    assert named["rtc-agent/vendor/marked.esm.js"] == Path(
        paths["rtc-agent/vendor/marked.esm.js.map"]
    ).name
    assert named["rtc-agent/vendor/purify.es.mjs"] == "purify.es.mjs.map"


@pytest.mark.django_db
def test_admin_renders_with_the_manifest_storage(
    static_root: Path, settings: Any, make_user: Any
) -> None:
    settings.STATIC_ROOT = static_root
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    paths = _manifest(static_root)
    anonymous = Client().get("/admin/login/")
    assert anonymous.status_code == 200
    assert f"/static/{paths['admin/css/base.css']}" in anonymous.content.decode()

    staff = Client()
    staff.force_login(make_user(is_staff=True, is_superuser=True))
    page = staff.get("/admin/rtc/rtc/")
    assert page.status_code == 200
    # The widget floating over the admin is served under its hashed name.
    assert f'src="/static/{paths[WIDGET]}"' in page.content.decode()
