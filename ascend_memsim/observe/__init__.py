"""Observers: torch-style statistics, traces (record, load), replay on any product, and
pictures (memory map, timeline).

They watch a runtime through ``Runtime.add_observer`` and may import everything below them
(checks, runtime, data, memory); only the testing toolkit, the CLI and the faces import them.
"""
