"""Tool search: indexes that find a request's tools by a query (progressive disclosure)."""
