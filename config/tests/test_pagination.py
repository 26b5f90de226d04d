"""The API lists' paginator: a count of the items from the page on, 0 when there are none."""

import pytest
from django.contrib.auth.models import Group
from django.core.paginator import EmptyPage

from config.pagination import CountFromPagePaginator

pytestmark = pytest.mark.django_db


def groups(count: int) -> None:
    Group.objects.bulk_create(Group(name=f"group-{n}") for n in range(count))


def test_a_page_past_the_end_counts_zero_items_so_that_the_paginator_refuses_it():
    groups(3)
    paginator = CountFromPagePaginator(Group.objects.order_by("name"), 2, page_number=3)

    assert paginator.count == 0
    with pytest.raises(EmptyPage):
        paginator.page(3)


def test_the_first_page_of_an_empty_list_counts_zero_items_and_holds_none():
    paginator = CountFromPagePaginator(Group.objects.order_by("name"), 2, page_number=1)

    page = paginator.page(1)

    assert (paginator.count, list(page)) == (0, [])


def test_a_page_within_the_list_counts_every_item_before_it_and_those_from_it_on():
    groups(5)
    paginator = CountFromPagePaginator(Group.objects.order_by("name"), 2, page_number=2)

    page = paginator.page(2)

    assert (paginator.count, paginator.count_is_lower_bound) == (5, False)
    assert [group.name for group in page] == ["group-2", "group-3"]


@pytest.mark.parametrize("page_size", ["null", "abc", "0", "-3", "2.5", " 7"])
def test_a_page_size_that_is_not_a_whole_number_of_1_or_more_is_refused_naming_it(api_client, page_size):
    response = api_client.get("/api/v1/users/", {"page_size": page_size})

    assert response.status_code == 400
    assert response.json() == {"page_size": ["A whole number of 1 or more (pages hold at most 500 items)."]}
