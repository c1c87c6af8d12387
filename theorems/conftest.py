"""The claims plugin (theorems.framework.plugin) is registered by the repository's root conftest.

`pytest_plugins` is not allowed in a non-root conftest, so this file only makes sure the
plugin is active if the root conftest was not loaded (e.g. an unusual --confcutdir).
"""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("theorems.framework.plugin"):
        config.pluginmanager.import_plugin("theorems.framework.plugin")
