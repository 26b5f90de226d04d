"""An ESP's bounces and complaints, posted as each ESP documents them, through anymail's verification.

Each payload is the ESP's documented sample (Amazon SES's notification contents in an SNS
envelope, Postmark's bounce and spam complaint webhooks, SendGrid's event webhook, Mailgun's
webhooks), with the recipient's address put in; each is posted through Django's test client,
signed (or authenticated) as the ESP would, and once wrongly.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from config.esp import ESP_WEBHOOK_VERIFIED_BY, esp_webhooks_check
from users.esp.views import VIEWS
from users.models import User
from users.services import user_update
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

BASIC_AUTH = "esp:correct-horse-battery"
MAILGUN_KEY = "key-of-the-mailgun-account"
# SendGrid signs with its own private key; the test plays SendGrid with a key pair of its own.
SENDGRID_PRIVATE = ec.generate_private_key(ec.SECP256R1())
SENDGRID_PUBLIC = base64.b64encode(
    SENDGRID_PRIVATE.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()
OTHER_PRIVATE = ec.generate_private_key(ec.SECP256R1())

ADDRESS = "jane@example.com"


@pytest.fixture(autouse=True)
def esps(settings):
    settings.ESP_WEBHOOKS = list(ESP_WEBHOOK_VERIFIED_BY)
    settings.ANYMAIL = {
        "WEBHOOK_SECRET": [BASIC_AUTH],
        "MAILGUN_WEBHOOK_SIGNING_KEY": MAILGUN_KEY,
        "SENDGRID_TRACKING_WEBHOOK_VERIFICATION_KEY": SENDGRID_PUBLIC,
    }


# --- The ESPs' documented samples -----------------------------------------------------------------


def ses_mail(destination: str) -> dict:
    return {
        "timestamp": "2016-01-27T14:59:38.237Z",
        "messageId": "00000138111222aa-33322211-cccc-cccc-cccc-ddddaaaa0680-000000",
        "source": "john@example.com",
        "sourceArn": "arn:aws:ses:us-east-1:888888888888:identity/example.com",
        "sourceIp": "127.0.3.0",
        "sendingAccountId": "123456789012",
        "callerIdentity": "IAM_user_or_role_name",
        "destination": [destination],
    }


def ses_bounce(address: str, bounce_type: str = "Permanent", sub_type: str = "General") -> dict:
    return {
        "notificationType": "Bounce",
        "bounce": {
            "bounceType": bounce_type,
            "reportingMTA": "dns; email.example.com",
            "bouncedRecipients": [
                {
                    "emailAddress": address,
                    "status": "5.1.1",
                    "action": "failed",
                    "diagnosticCode": f"smtp; 550 5.1.1 <{address}>... User",
                }
            ],
            "bounceSubType": sub_type,
            "timestamp": "2016-01-27T14:59:38.237Z",
            "feedbackId": "00000138111222aa-33322211-cccc-cccc-cccc-ddddaaaa068a-000000",
            "remoteMtaIp": "127.0.2.0",
        },
        "mail": ses_mail(address),
    }


def ses_complaint(address: str) -> dict:
    return {
        "notificationType": "Complaint",
        "complaint": {
            "userAgent": "AnyCompany Feedback Loop (V0.01)",
            "complainedRecipients": [{"emailAddress": address}],
            "complaintFeedbackType": "abuse",
            "arrivalDate": "2016-01-27T14:59:38.237Z",
            "timestamp": "2016-01-27T14:59:38.237Z",
            "feedbackId": "000001378603177f-18c07c78-fa81-4a58-9dd1-fedc3cb8f49a-000000",
        },
        "mail": ses_mail(address),
    }


def postmark_bounce(address: str, kind: str = "HardBounce", code: int = 1) -> dict:
    return {
        "RecordType": "Bounce",
        "MessageStream": "outbound",
        "ID": 4323372036854775807,
        "Type": kind,
        "TypeCode": code,
        "Name": "Hard bounce" if kind == "HardBounce" else "Soft bounce",
        "Tag": "Test",
        "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
        "Metadata": {"a_key": "a_value"},
        "ServerID": 23,
        "Description": "The server was unable to deliver your message (ex: unknown user, mailbox not found).",
        "Details": "Test bounce details",
        "Email": address,
        "From": "sender@example.com",
        "BouncedAt": "2019-11-05T16:33:54.9070259Z",
        "DumpAvailable": True,
        "Inactive": True,
        "CanActivate": True,
        "Subject": "Test subject",
        "Content": "<Full dump of bounce>",
    }


def postmark_complaint(address: str) -> dict:
    return {
        **postmark_bounce(address, kind="SpamComplaint", code=512),
        "RecordType": "SpamComplaint",
        "Name": "Spam complaint",
        "Description": "The subscriber explicitly marked this message as spam.",
        "Details": "Test spam complaint details",
    }


def sendgrid_event(address: str, event: str, **fields: Any) -> list[dict]:
    return [
        {
            "email": address,
            "timestamp": 1513299569,
            "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>",
            "event": event,
            "category": "cat facts",
            "sg_event_id": "6g4ZI7SA-xmRDv57GoPIPw==",
            "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0",
            **fields,
        }
    ]


def sendgrid_bounce(address: str, kind: str = "bounce") -> list[dict]:
    return sendgrid_event(
        address,
        "bounce",
        reason="500 unknown recipient",
        status="5.0.0",
        type=kind,
        bounce_classification="Invalid Address",
    )


def mailgun_event(address: str, event: str, **fields: Any) -> dict:
    return {
        "signature": {
            "timestamp": "1529006854",
            "token": "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0",
            "signature": "",  # signed in post()
        },
        "event-data": {
            "event": event,
            "id": "G9Bn5sl1TC6nu79C8C0bwg",
            "timestamp": 1521233195.375624,
            "envelope": {"sender": "bob@sandbox.mailgun.org", "transport": "smtp", "targets": address},
            "message": {
                "headers": {
                    "to": f"Jane <{address}>",
                    "message-id": "20130503182626.18666.16540@sandbox.mailgun.org",
                    "from": "Bob <bob@sandbox.mailgun.org>",
                    "subject": "Test permanent_fail webhook",
                },
                "attachments": [],
                "size": 111,
            },
            "recipient": address,
            "recipient-domain": address.partition("@")[2],
            "tags": ["my_tag_1"],
            "user-variables": {},
            **fields,
        },
    }


def mailgun_failed(address: str, severity: str = "permanent") -> dict:
    permanent = severity == "permanent"
    return mailgun_event(
        address,
        "failed",
        severity=severity,
        reason="bounce" if permanent else "generic",
        **{
            "log-level": "error" if permanent else "warn",
            "delivery-status": {
                "attempt-no": 1,
                "message": "550 5.1.1 The email account that you tried to reach does not exist."
                if permanent
                else "452 Too many recipients received this hour",
                "code": 550 if permanent else 452,
                "description": "",
                "session-seconds": 0.1,
            },
        },
    )


# --- Posting as each ESP does ---------------------------------------------------------------------


def basic(auth: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(auth.encode()).decode()}


def post(esp: str, body: Any, *, genuine: bool = True):
    """POST `body` to the ESP's tracking webhook, verified as it would be, or with a wrong secret."""
    headers: dict[str, str] = {}
    if esp == "amazon_ses":
        envelope = {
            "Type": "Notification",
            "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
            "TopicArn": "arn:aws:sns:us-west-2:123456789012:MyTopic",
            "Message": json.dumps(body),
            "Timestamp": "2016-01-27T14:59:38.237Z",
            "SignatureVersion": "1",
            "Signature": "EXAMPLEpH+DcEwjAPg8O9mY8dReBSwksfg2S7WKQcikcNKWLQjwu6A4VbeS0QHVCkhRS7fUQvi2egU3N858fiTDN6bkkOxYDVrY0Ad8L10Hs3zH81mtnPk5uvvolIC1CXGu43obcgFxeL3khZl8IKvO61GWB6jI9b5+gLPoBc1Q=",
            "SigningCertURL": "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem",
            "UnsubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:us-west-2:123456789012:MyTopic:c9135db0-26c4-47ec-8998-413945fb5a96",
        }
        raw = json.dumps(envelope).encode()
        headers = {
            "HTTP_X_AMZ_SNS_MESSAGE_TYPE": "Notification",
            "HTTP_X_AMZ_SNS_MESSAGE_ID": envelope["MessageId"],
            **basic(BASIC_AUTH if genuine else "esp:wrong"),
        }
    elif esp == "postmark":
        raw = json.dumps(body).encode()
        headers = basic(BASIC_AUTH if genuine else "esp:wrong")
    elif esp == "sendgrid":
        raw = json.dumps(body).encode()
        timestamp = "1513299569"
        signer = SENDGRID_PRIVATE if genuine else OTHER_PRIVATE
        signature = signer.sign(timestamp.encode() + raw, ec.ECDSA(hashes.SHA256()))
        headers = {
            "HTTP_X_TWILIO_EMAIL_EVENT_WEBHOOK_SIGNATURE": base64.b64encode(signature).decode(),
            "HTTP_X_TWILIO_EMAIL_EVENT_WEBHOOK_TIMESTAMP": timestamp,
            **basic(BASIC_AUTH),
        }
    elif esp == "mailgun":
        block = body["signature"]
        key = MAILGUN_KEY if genuine else "another-key"
        block["signature"] = hmac.new(
            key.encode(), f"{block['timestamp']}{block['token']}".encode(), hashlib.sha256
        ).hexdigest()
        raw = json.dumps(body).encode()
        # WEBHOOK_SECRET, once set, is asked of every ESP's posts: its URL carries it too.
        headers = basic(BASIC_AUTH)
    else:
        raise AssertionError(esp)
    return Client(enforce_csrf_checks=True).post(
        f"/esp/{esp}/tracking/", raw, content_type="application/json", **headers
    )


@dataclass
class Sample:
    hard_bounce: Any
    soft_bounce: Any
    complaint: Any


SAMPLES = {
    "amazon_ses": lambda a: Sample(
        ses_bounce(a), ses_bounce(a, bounce_type="Transient", sub_type="MailboxFull"), ses_complaint(a)
    ),
    "postmark": lambda a: Sample(
        postmark_bounce(a), postmark_bounce(a, kind="SoftBounce", code=4096), postmark_complaint(a)
    ),
    "sendgrid": lambda a: Sample(
        sendgrid_bounce(a), sendgrid_bounce(a, kind="blocked"), sendgrid_event(a, "spamreport")
    ),
    "mailgun": lambda a: Sample(
        mailgun_failed(a), mailgun_failed(a, "temporary"), mailgun_event(a, "complained")
    ),
}
ESPS = pytest.mark.parametrize("esp", list(SAMPLES))


def undeliverable(user: User) -> tuple[bool, str]:
    user.refresh_from_db()
    return user.email_undeliverable_at is not None, user.email_undeliverable_reason


# --- What each post does --------------------------------------------------------------------------


@ESPS
def test_a_hard_bounce_marks_the_persons_address(esp):
    jane = UserFactory(email=ADDRESS)
    other = UserFactory(email="someone@example.com")

    response = post(esp, SAMPLES[esp](ADDRESS).hard_bounce)

    assert response.status_code == 200
    marked, reason = undeliverable(jane)
    assert marked
    assert "hard bounce" in reason
    assert undeliverable(other) == (False, "")


@ESPS
def test_a_wrongly_signed_post_is_refused_and_marks_nothing(esp):
    jane = UserFactory(email=ADDRESS)

    response = post(esp, SAMPLES[esp](ADDRESS).hard_bounce, genuine=False)

    assert response.status_code in (400, 401, 403)
    assert undeliverable(jane) == (False, "")


@ESPS
def test_a_post_without_any_credentials_is_refused(esp):
    jane = UserFactory(email=ADDRESS)
    raw = json.dumps(SAMPLES[esp](ADDRESS).hard_bounce).encode()

    response = Client().post(f"/esp/{esp}/tracking/", raw, content_type="application/json")

    assert response.status_code in (400, 401, 403)
    assert undeliverable(jane) == (False, "")


@ESPS
def test_a_soft_bounce_changes_nothing(esp):
    jane = UserFactory(email=ADDRESS)

    response = post(esp, SAMPLES[esp](ADDRESS).soft_bounce)

    assert response.status_code == 200
    assert undeliverable(jane) == (False, "")


@ESPS
def test_a_complaint_marks_the_persons_address(esp):
    jane = UserFactory(email=ADDRESS)

    response = post(esp, SAMPLES[esp](ADDRESS).complaint)

    assert response.status_code == 200
    marked, reason = undeliverable(jane)
    assert marked
    assert "complaint" in reason


@ESPS
def test_a_bounce_of_an_address_no_one_has_is_ignored(esp):
    jane = UserFactory(email=ADDRESS)

    response = post(esp, SAMPLES[esp]("nobody@example.com").hard_bounce)

    assert response.status_code == 200
    assert undeliverable(jane) == (False, "")


def test_the_old_address_bouncing_late_does_not_mark_the_new_one():
    # given Jane, whose address changed after a greeting went to the old one
    jane = UserFactory(email="jane.old@example.com")
    user_update(user=jane, data={"email": ADDRESS})

    # when the ESP reports the old address bounced
    response = post("postmark", postmark_bounce("jane.old@example.com"))

    # then her new address stays deliverable
    assert response.status_code == 200
    assert undeliverable(jane) == (False, "")


def test_the_address_is_found_as_it_is_stored():
    # the ESP reports the domain in capitals, with a display name
    jane = UserFactory(email=ADDRESS)

    response = post("postmark", postmark_bounce("Jane Doe <jane@EXAMPLE.com>"))

    assert response.status_code == 200
    assert undeliverable(jane)[0]


def test_an_esp_not_enabled_is_not_found(settings):
    settings.ESP_WEBHOOKS = ["mailgun"]
    jane = UserFactory(email=ADDRESS)

    response = post("postmark", postmark_bounce(ADDRESS))

    assert response.status_code == 404
    assert undeliverable(jane) == (False, "")


def test_an_sns_subscription_confirmation_is_left_to_the_operator(caplog):
    message = {
        "Type": "SubscriptionConfirmation",
        "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
        "Token": "2336412f37",
        "TopicArn": "arn:aws:sns:us-west-2:123456789012:MyTopic",
        "Message": "You have chosen to subscribe to the topic.",
        "SubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&Token=2336412f37",
        "Timestamp": "2012-04-26T20:45:04.751Z",
    }
    response = Client().post(
        "/esp/amazon_ses/tracking/",
        json.dumps(message),
        content_type="application/json",
        HTTP_X_AMZ_SNS_MESSAGE_TYPE="SubscriptionConfirmation",
        HTTP_X_AMZ_SNS_MESSAGE_ID=message["MessageId"],
        **basic(BASIC_AUTH),
    )

    assert response.status_code == 200
    [record] = [r for r in caplog.records if r.name == "users.esp.views"]
    assert record.subscribe_url == message["SubscribeURL"]


# --- Settings -------------------------------------------------------------------------------------


def test_every_esp_that_settings_know_has_its_view():
    assert set(VIEWS) == set(ESP_WEBHOOK_VERIFIED_BY)


@pytest.mark.parametrize(
    ("enabled", "anymail", "named"),
    [
        (["sparkpost"], {}, "'sparkpost' is not one of"),
        (["postmark"], {"MAILGUN_WEBHOOK_SIGNING_KEY": "k"}, "ESP_WEBHOOK_SECRET"),
        (["mailgun"], {"WEBHOOK_SECRET": ["a:b"]}, "ESP_MAILGUN_WEBHOOK_SIGNING_KEY"),
        (["sendgrid"], {}, "ESP_SENDGRID_TRACKING_WEBHOOK_VERIFICATION_KEY"),
    ],
)
def test_an_esp_that_nothing_would_verify_stops_the_start(enabled, anymail, named):
    with pytest.raises(ImproperlyConfigured, match=named):
        esp_webhooks_check(enabled=enabled, anymail=anymail)


def test_verified_esps_start():
    esp_webhooks_check(enabled=["sendgrid"], anymail={"SENDGRID_TRACKING_WEBHOOK_VERIFICATION_KEY": "k"})
    esp_webhooks_check(enabled=[], anymail={})


def test_a_batch_larger_than_the_apis_limit_is_taken(settings):
    # given the settings an enabled ESP starts with: Django's ceiling raised to the ESPs' limit
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = settings.ESP_WEBHOOK_MAX_BODY_BYTES
    jane = UserFactory(email=ADDRESS)
    # SendGrid batches its events: deliveries of others, then Jane's hard bounce
    batch = [event for n in range(600) for event in sendgrid_event(f"p{n}@example.com", "delivered")]
    batch += sendgrid_bounce(ADDRESS)
    assert len(json.dumps(batch)) > settings.API_MAX_BODY_BYTES

    response = post("sendgrid", batch)

    assert response.status_code == 200
    assert undeliverable(jane)[0]


def test_a_post_over_the_esps_limit_is_refused(settings):
    settings.ESP_WEBHOOK_MAX_BODY_BYTES = 1000
    jane = UserFactory(email=ADDRESS)
    batch = [event for n in range(20) for event in sendgrid_event(f"p{n}@example.com", "delivered")]
    batch += sendgrid_bounce(ADDRESS)

    response = post("sendgrid", batch)

    assert response.status_code == 413
    assert undeliverable(jane) == (False, "")
