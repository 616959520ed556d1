"""The ``hybrid`` command line. Each sub-command lives in its own module, imported only when it runs."""
