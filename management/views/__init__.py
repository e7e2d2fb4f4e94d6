"""The management API's views, one module per resource."""
