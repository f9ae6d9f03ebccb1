"""The HTML pages, one module per page type; each page has a JSON twin (`?format=json`)."""
