"""The testing toolkit: the pytest plugin (the ``memsim`` fixture and marker), the
``AllocatorMachine`` state machine, and ``exhaustive`` (fail every allocation call in turn).
Hypothesis strategies are the public module :mod:`ascend_memsim.strategies`.

It sits above every other layer; only the faces and the CLI import it.
"""
