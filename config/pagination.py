from typing import Any

from django.core.paginator import InvalidPage, Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

# Items counted past the end of the page asked for, at most: 20 pages of the
# largest size. A list of every recipient would otherwise be counted whole on
# every page, an index entry per recipient; further on, a client follows `next`.
MOST_ITEMS_COUNTED_PAST_PAGE = 10_000
# PostgreSQL's OFFSET is a bigint: a page number past it is past any list's end.
LARGEST_OFFSET = 2**63 - 1


class CountFromPagePaginator(Paginator):
    """A paginator whose count reads the items up to the page asked for, and at most `bound` past it.

    The count is of a LIMITed subquery ordered as the list is, so it reads
    the index range the page reads (its OFFSET passes over the items before
    the page anyway) and stops `bound` items after the page. Items further on
    are not counted: `count_is_lower_bound` then says so. The page links go
    no further than the counted items, which always reach past the page, so
    `next` exists whenever the page has a successor.
    """

    bound = MOST_ITEMS_COUNTED_PAST_PAGE
    object_list: QuerySet[Any]  # a list the API pages is a query: counted by COUNT over a LIMIT

    def __init__(self, object_list, per_page, *, page_number) -> None:
        super().__init__(object_list, per_page)
        try:
            number = int(page_number)
        except (TypeError, ValueError):
            number = 1  # page() refuses it, as it refuses any number not a page
        self.first_item = max(number - 1, 0) * self.per_page

    @cached_property
    def _counted_from_page(self) -> int:
        end = self.first_item + self._most_counted + 1
        if end > LARGEST_OFFSET:
            return 0
        return self.object_list[self.first_item : end].count()

    @property
    def _most_counted(self) -> int:
        return self.per_page + self.bound

    @cached_property
    def count(self) -> int:
        # Items from the page on mean every item before it exists. No item
        # from the page on means the page is past the end (or the list is
        # empty): the count is then 0, so page() refuses any page but the
        # first, as an exact count would, and an empty list's first page
        # counts 0 items.
        if not self._counted_from_page:
            return 0
        return self.first_item + min(self._counted_from_page, self._most_counted)

    @property
    def count_is_lower_bound(self) -> bool:
        return self._counted_from_page > self._most_counted


PAGE_SIZE_REFUSED = "A whole number of 1 or more (pages hold at most 500 items)."


class StandardPagination(PageNumberPagination):
    """`count`, `count_is_lower_bound`, `next`, `previous`, `results`; clients may ask for up to 500 a page."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    page_size_query_description = (
        f"How many items a page holds: {page_size} unless given, at most {max_page_size}."
    )

    def get_page_size(self, request) -> int:
        """The page_size asked for (cut to max_page_size), or the default; a malformed one is refused.

        DRF's falls back to the default for `page_size=abc` or `0`: a client's mistake would pass
        unseen, with pages of another size than it asked for.
        """
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if size < 1 or not raw.isdigit():
            raise ValidationError({self.page_size_query_param: [PAGE_SIZE_REFUSED]})
        return min(size, self.max_page_size)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"]["minimum"] = 1
        return parameters

    def paginate_queryset(self, queryset, request, view=None):
        # DRF's own, with a paginator that knows which page it counts from, and
        # without page=last: which page is last is what the count does not read.
        self.request = request
        page_number = request.query_params.get(self.page_query_param) or 1
        paginator = CountFromPagePaginator(queryset, self.get_page_size(request), page_number=page_number)
        try:
            self.page = paginator.page(page_number)
        except InvalidPage as exc:
            raise NotFound(
                self.invalid_page_message.format(page_number=page_number, message=str(exc))
            ) from exc
        if paginator.num_pages > 1 and self.template is not None:
            self.display_page_controls = True
        return list(self.page)

    def get_paginated_response(self, data):
        # The page paginate_queryset read, of its paginator.
        assert self.page is not None and isinstance(self.page.paginator, CountFromPagePaginator)
        return Response(
            {
                "count": self.page.paginator.count,
                "count_is_lower_bound": self.page.paginator.count_is_lower_bound,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema):
        # DRF's own, with all five keys required (every page has them) and described.
        paginated = super().get_paginated_response_schema(schema)
        drf = paginated["properties"]
        paginated["properties"] = {
            "count": drf["count"],
            "count_is_lower_bound": {"type": "boolean", "example": False},
            "next": drf["next"],
            "previous": drf["previous"],
            "results": drf["results"],
        }
        paginated["required"] = ["count", "count_is_lower_bound", "next", "previous", "results"]
        for key, description in {
            "count": (
                f"How many items there are on all pages together, counted up to "
                f"{MOST_ITEMS_COUNTED_PAST_PAGE:,} items past the end of this page: when there are more, "
                f"count_is_lower_bound is true and there are at least this many."
            ),
            "count_is_lower_bound": (
                f"True when more items follow than were counted ({MOST_ITEMS_COUNTED_PAST_PAGE:,} past the end "
                f"of this page): count is then a lower bound. Follow next to the end to read them all."
            ),
            "next": "The URL of the next page; null on the last one.",
            "previous": "The URL of the previous page; null on the first one.",
            "results": "This page's items.",
        }.items():
            paginated["properties"][key]["description"] = description
        return paginated
