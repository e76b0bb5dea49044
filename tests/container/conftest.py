"""The container tests' marker, so a developer can deselect them: `pytest -m "not container"`."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "container: builds the cpu image with podman or docker (slow the first time)"
    )
