"""Test support shared by several test folders (importable as ``support``: pytest puts
``tests/`` on ``sys.path`` because it has no ``__init__.py``)."""
