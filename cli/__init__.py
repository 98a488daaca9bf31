"""The ``memroot`` command line: thin click commands over the library.

The console script is ``memroot.cli.main:main``.
"""
