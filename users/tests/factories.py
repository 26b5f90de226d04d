from datetime import date

import factory

from users.models import User


class UserFactory(factory.django.DjangoModelFactory):
    """Saves through the model, so the post_save receiver schedules events."""

    class Meta:
        model = User

    first_name = factory.Faker("first_name")
    last_name = factory.Faker("last_name")
    date_of_birth = factory.Faker("date_between", start_date=date(1950, 1, 1), end_date=date(2005, 12, 31))
    timezone = "America/New_York"
