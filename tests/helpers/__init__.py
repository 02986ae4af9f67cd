"""Helpers the tests share: plain functions and constants, imported as `tests.helpers.X`.

Fixtures stay in the conftest.py files; test modules import from here, never from a conftest
or from another test module.
"""
