"""Settings for a server process that a test starts to check something other than password
hashing: ``rtcagent.settings`` with the test run's cheap hasher (``tests/conftest.py``). The
production hasher spends a fixed, deliberate 0.3 to 0.8 s on every refused password (Django
hashes even an unknown user's or an unreadable hash's), so a test of 30 refusals spent its
time hashing. Users made by the tests' ``make_user`` verify under it; nothing else changes."""

from rtcagent.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
