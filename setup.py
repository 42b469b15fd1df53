"""For the tools that still call setup.py (``python setup.py develop``, older Ascend build scripts).

pyproject.toml is the one source of the build: name, version, dependencies, packages and entry
points are all read from it; this file adds nothing.
"""
from setuptools import setup

setup()
