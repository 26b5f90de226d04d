from rest_framework.permissions import DjangoModelPermissions


class ModelPermissions(DjangoModelPermissions):
    """Django's model permissions for every API method, reads included.

    DRF's class lets any authenticated account read; here GET and HEAD need the
    model's `view` permission too, so an account given only `add` cannot list
    everyone. Unauthenticated requests still get 401 (DRF turns a refusal into
    401 when no credentials were sent), accounts without the permission 403.
    """

    perms_map = {
        **DjangoModelPermissions.perms_map,
        "GET": ["%(app_label)s.view_%(model_name)s"],
        "HEAD": ["%(app_label)s.view_%(model_name)s"],
        "OPTIONS": ["%(app_label)s.view_%(model_name)s"],
    }
