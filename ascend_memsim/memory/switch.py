"""The words of the ``ASCEND_MEMSIM`` switch, in a module that imports nothing.

The runtime reads them here (:func:`ascend_memsim.runtime.active.env_product`); the startup
line ``ascend_memsim.pth`` spells :data:`OFF_WORDS` inline, so an interpreter started with the
variable unset imports nothing at all (``tests/test_startup_hook.py`` checks that the two
spellings agree).
"""

__all__ = ["VARIABLE", "OFF_WORDS", "ON_WORDS"]

#: the environment variable that makes ``import acl`` the simulator
VARIABLE = "ASCEND_MEMSIM"
#: values (case and spaces aside) that leave the simulator off
OFF_WORDS = ("", "0", "false", "no", "off")
#: values that turn it on without naming a product
ON_WORDS = ("1", "true", "yes", "on")
