"""A tiny demo app whose tools.py shows tool autodiscovery end to end."""
