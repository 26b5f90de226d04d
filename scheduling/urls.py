from rest_framework.routers import SimpleRouter

from scheduling.views import EventTypePauseViewSet

# Simple: the API's root view is users.urls' router's.
router = SimpleRouter()
router.register("event-types", EventTypePauseViewSet, basename="event-type")

urlpatterns = router.urls
