"""The person's pages: thin, over delivery.actions.optouts."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from delivery.actions.optouts import destination_opt_out_set, unsubscribe_pair
from people.responses import not_found, private_page
from scheduling.celebration import ChangedBy


# RFC 8058: the mail client POSTs "List-Unsubscribe=One-Click" with no cookies and no CSRF token,
# so the signed token is the whole authority; it can only ever opt this person out of this
# destination, which is harmless to do twice or to do for someone by mistake. A GET changes
# nothing (mail scanners follow links): it shows a button that POSTs. Not throttled by client
# address, as the person's page is: the one-click POSTs come from the mail providers' servers, many
# people's from one address, and a 429 would leave them subscribed; the token, a signature, cannot
# be guessed by trying.
@csrf_exempt
@require_http_methods(["GET", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    pair = unsubscribe_pair(token=token)
    if pair is None:
        return not_found()
    user, destination = pair
    done = request.method == "POST"
    if done:
        destination_opt_out_set(
            user=user, destination=destination, opted_out=True, changed_by=ChangedBy.PERSON
        )
    return private_page(
        request,
        template="people/unsubscribe.html",
        context={"first_name": user.first_name, "destination_name": destination.name, "done": done},
        language=user.language,
    )
