"""Chat model adapters for model providers; each provider's SDK is imported only by its module."""
