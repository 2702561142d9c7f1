import pytest


@pytest.fixture(params=["reference", "fast", "native"])
def backend(request):
    """Every conformance test runs once per emulator backend."""
    return request.param
