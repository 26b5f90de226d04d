"""A recipient's fields, declared once (users.fields): the shapes written out elsewhere agree with it."""

from scheduling.handlers import RecipientRow
from users.fields import RECIPIENT_FIELDS, USER_FIELDS, NewRecipient
from users.models import User
from users.services import ImportedUserRow


def test_each_field_stored_in_a_column_has_its_column_and_every_other_column_is_no_clients():
    columns = {field.name for field in User._meta.concrete_fields}

    assert set(USER_FIELDS) <= columns
    # A column added to the recipient is one a client gives (a field of users.fields),
    # or one of these, which the services write themselves.
    assert columns - set(USER_FIELDS) == {
        "id",
        "paused_at",
        "paused_by",
        "resumed_at",
        "resumed_by",
        "email_undeliverable_at",
        "email_undeliverable_reason",
        "version",
        "created_at",
        "updated_at",
    }


def test_every_field_a_handler_reads_is_a_recipients_field():
    # scheduling cannot import users.fields: its shape of a recipient is checked here.
    assert set(RecipientRow._fields) - {"id"} <= set(USER_FIELDS)


def test_the_bulk_import_writes_every_field_stored_in_a_column():
    assert set(ImportedUserRow._fields) == {
        "id",
        *USER_FIELDS,
        "created_at",
        "updated_at",
        "paused_at",
        "paused_by",
    }


def test_user_create_takes_every_field_stored_in_a_column_requiring_the_required_ones():
    assert set(NewRecipient.__annotations__) == set(USER_FIELDS)
    assert NewRecipient.__required_keys__ == {field.name for field in RECIPIENT_FIELDS if field.required}
