"""One rule for labels at every door: the API, the console's box and an import's cell read and refuse alike."""

import pytest
from django.core.exceptions import ValidationError

from scheduling.labels import clean_labels, labels_from_text
from users.models import User
from users.tests.test_import_users import run_failing_import, run_import, write_csv

pytestmark = pytest.mark.django_db

HEADER = "first_name,last_name,date_of_birth,timezone,external_id,labels\n"


@pytest.mark.parametrize(
    ("typed", "read"),
    [
        ("team:platform, remote", ["team:platform", "remote"]),
        ("team:platform;remote", ["team:platform", "remote"]),
        (" ,; team:platform ;", ["team:platform"]),
        ("team platform", ["team platform"]),  # one label holding a space: refused by clean_labels
        ("", []),
    ],
)
def test_labels_typed_on_a_line_are_split_at_commas_and_semicolons_never_at_spaces(typed, read):
    assert labels_from_text(typed) == read


def test_an_import_cell_with_a_space_is_refused_as_the_api_refuses_it_not_split(tmp_path):
    _, err = run_failing_import(
        write_csv(tmp_path, HEADER + "Ada,Lovelace,1990-05-05,Europe/Berlin,a1,team platform\n")
    )

    assert "line 2: labels: Label 'team platform' holds a space: separate labels with commas" in err
    assert not User.objects.exists()
    with pytest.raises(ValidationError, match="holds a space"):
        clean_labels(["team platform"])


def test_an_import_cell_quoted_with_commas_is_read_as_the_consoles_box_reads_it(tmp_path):
    run_import(
        write_csv(tmp_path, HEADER + 'Ada,Lovelace,1990-05-05,Europe/Berlin,a1,"team:platform, remote"\n')
    )

    assert User.objects.get(external_id="a1").labels == ["remote", "team:platform"]
