from rest_framework.pagination import PageNumberPagination


class StandardPagination(PageNumberPagination):
    """`count`, `next`, `previous`, `results`; clients may ask for up to 500 a page."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    page_size_query_description = (
        f"How many items a page holds: {page_size} unless given, at most {max_page_size}."
    )

    def get_paginated_response_schema(self, schema):
        # DRF's own, with all four keys required (every page has them) and described.
        paginated = super().get_paginated_response_schema(schema)
        paginated["required"] = ["count", "next", "previous", "results"]
        for key, description in {
            "count": "How many items there are on all pages together.",
            "next": "The URL of the next page; null on the last one.",
            "previous": "The URL of the previous page; null on the first one.",
            "results": "This page's items.",
        }.items():
            paginated["properties"][key]["description"] = description
        return paginated
