from rest_framework.routers import DefaultRouter

from delivery.views import DestinationRecoveryViewSet, DestinationViewSet

router = DefaultRouter()
router.register("destinations", DestinationViewSet, basename="destination")
router.register(
    r"destinations/(?P<destination_pk>[0-9]+)/recoveries",
    DestinationRecoveryViewSet,
    basename="destination-recovery",
)

urlpatterns = router.urls
