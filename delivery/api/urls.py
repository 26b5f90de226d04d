from django.urls import path
from rest_framework.routers import DefaultRouter

from delivery.api.views import (
    CalendarFeedView,
    DestinationHealthView,
    DestinationRecoveryViewSet,
    DestinationViewSet,
    FailureGroupAcknowledgeView,
    FailureGroupListView,
    FailureGroupResendView,
    UpcomingListView,
)

router = DefaultRouter()
router.register("destinations", DestinationViewSet, basename="destination")
router.register(
    r"destinations/(?P<destination_pk>[0-9]+)/recoveries",
    DestinationRecoveryViewSet,
    basename="destination-recovery",
)

urlpatterns = [
    # Not "destinations/health/": the router's "destinations/<pk>/" is the destination of that id.
    path("destinations-health/", DestinationHealthView.as_view(), name="destination-health"),
    path("failures/", FailureGroupListView.as_view(), name="failure-groups"),
    path("failures/acknowledge/", FailureGroupAcknowledgeView.as_view(), name="failure-groups-acknowledge"),
    path("failures/resend/", FailureGroupResendView.as_view(), name="failure-groups-resend"),
    path("upcoming/", UpcomingListView.as_view(), name="upcoming"),
    # The token is the credential (delivery.upcoming.feeds): a calendar cannot send a header.
    path("calendar/<str:token>.ics", CalendarFeedView.as_view(), name="calendar-feed"),
    *router.urls,
]
