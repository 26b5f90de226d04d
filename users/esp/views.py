"""The ESPs' tracking webhooks: anymail's views, each taken only while ESP_WEBHOOKS enables it."""

import logging
import warnings
from collections.abc import Callable

from anymail.exceptions import AnymailNotSupportedWarning, AnymailWebhookValidationFailure
from anymail.webhooks.amazon_ses import AmazonSESTrackingWebhookView
from anymail.webhooks.base import AnymailBaseWebhookView
from anymail.webhooks.mailgun import MailgunTrackingWebhookView
from anymail.webhooks.postmark import PostmarkTrackingWebhookView
from anymail.webhooks.sendgrid import SendGridTrackingWebhookView
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

logger = logging.getLogger(__name__)

# anymail warns on every SendGrid post that it no longer tests against SendGrid; its parsing and
# its check of SendGrid's signature are unchanged, and the warning would fill the log.
warnings.filterwarnings("ignore", category=AnymailNotSupportedWarning)


class AmazonSESTrackingView(AmazonSESTrackingWebhookView):
    """anymail's Amazon SES view, without boto3.

    anymail confirms an SNS subscription through boto3's SNS client, with AWS credentials of
    the web server's; its base view reads boto3's parameters on every request, and fails
    without boto3. Here the confirmation request (basic auth verified first) is logged with
    its SubscribeURL for the operator to open once (docs/operations.md).
    """

    def __init__(self, **kwargs: object) -> None:
        # Past AmazonSESBaseWebhookView.__init__ (boto3's parameters) to the basic auth's.
        AnymailBaseWebhookView.__init__(self, **kwargs)
        self.auto_confirm_enabled = True

    def auto_confirm_sns_subscription(self, sns_message: dict) -> None:
        if not self.basic_auth:  # never so while settings start (config/esp.py); as anymail refuses
            raise AnymailWebhookValidationFailure("An SNS subscription to confirm without WEBHOOK_SECRET")
        logger.warning(
            "Amazon SNS asks to confirm a subscription: open its SubscribeURL once",
            extra={
                "topic_arn": sns_message.get("TopicArn"),
                "subscribe_url": sns_message.get("SubscribeURL"),
            },
        )


# Each ESP of config.esp.ESP_WEBHOOK_VERIFIED_BY, by its path segment.
VIEWS: dict[str, Callable[..., HttpResponse]] = {
    "amazon_ses": AmazonSESTrackingView.as_view(),
    "postmark": PostmarkTrackingWebhookView.as_view(),
    "sendgrid": SendGridTrackingWebhookView.as_view(),
    "mailgun": MailgunTrackingWebhookView.as_view(),
}


@csrf_exempt  # as anymail's views are: an ESP has no CSRF token; its posts are verified instead
def esp_tracking(request: HttpRequest, esp: str) -> HttpResponse:
    """anymail's view of `esp`, or 404 while ESP_WEBHOOKS does not name it."""
    if esp not in settings.ESP_WEBHOOKS:
        raise Http404
    return VIEWS[esp](request)
