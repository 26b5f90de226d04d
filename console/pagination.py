"""A change list paginator whose count stops at a bound, so a page costs the same whatever the table holds."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property

# Rows counted at most: 20 pages of 50. Further back, an operator narrows the
# list with a filter or a search rather than paging.
MOST_ROWS_COUNTED = 1000


class BoundedPaginator(Paginator):
    """Counts at most `bound` + 1 rows of the filtered list; `more` says whether there are more.

    Django's ChangeList takes `paginator.count` on every page, even with
    show_full_result_count off, and a plain COUNT(*) reads every matching row:
    over years of history, that is the whole table on every page view. Here the
    count is of a LIMITed subquery, ordered as the list is, so it reads the same
    index range the pages do and stops after `bound` + 1 rows. The count it
    reports is the bound when there are more, so page links reach the last
    counted page; the pagination line says "more than" (templates/admin/pagination.html).
    """

    bound = MOST_ROWS_COUNTED
    object_list: QuerySet[Any]  # a change list's rows are a query: counted by COUNT over a LIMIT

    @cached_property
    def _counted(self) -> int:
        return self.object_list[: self.bound + 1].count()

    @cached_property
    def count(self) -> int:
        return min(self._counted, self.bound)

    @property
    def more(self) -> bool:
        """Whether rows beyond the bound match (the count then says `bound`)."""
        return self._counted > self.bound


class BoundedChangeList(ChangeList):
    """A change list whose every read of the rows has a LIMIT, its count included (BoundedPaginator).

    Django reads the whole filtered queryset, without a LIMIT, when the count
    says it fits on one page or "Show all" is asked for and allowed: the
    count already said how few rows that is, but the planner, not told,
    may choose a plan for all of the table. The LIMIT tells it.
    """

    def get_results(self, request):
        super().get_results(request)
        if self.paginator.more:
            # "Show all" of more rows than were counted is no longer "all": page instead.
            self.can_show_all = False
            self.result_list = self.paginator.page(self.page_num).object_list
        elif not self.result_list.query.is_sliced:
            self.result_list = self.result_list[: max(self.list_per_page, self.list_max_show_all)]


class BoundedListAdmin(admin.ModelAdmin):
    """A model admin whose list costs the same whatever its table holds: a bounded count, no totals, no facets."""

    paginator = BoundedPaginator
    # "N total" and the facets' counts would each count the whole table.
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    def get_changelist(self, request, **kwargs):
        return BoundedChangeList
