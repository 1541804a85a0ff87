"""Django database backends: name one in ``DATABASES[...]["ENGINE"]``."""
