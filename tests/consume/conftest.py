from tests.compat.conftest import agents  # noqa: F401  (the official-client agents fixture)
