"""The destinations API: views, serializers, the OpenAPI description, the URLs. Thin: the services decide."""
