"""The ``memroot`` command line: thin click commands over the library (``cli.main:main``)."""
