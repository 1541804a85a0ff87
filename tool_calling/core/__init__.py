"""The pure-Python core: no Django imports anywhere below this package."""
