"""Live-call fixtures: the engine's (the gateway, the scripted model, worker processes)."""

from tests.gateway.conftest import gateway  # noqa: F401 - re-exported fixture
from tests.turns.conftest import make_workers  # noqa: F401 - re-exported fixture
