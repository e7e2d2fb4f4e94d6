"""Two-factor authentication (TOTP, django-otp): enrolling, the two-step login of the dashboard
and the admin, recovery codes, turning it off, and the login throttle over the code step."""

from __future__ import annotations

import re
import time

import pytest
from django.conf import settings
from django.test import Client
from django_otp.oath import TOTP
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import twofactor
from accounts.models import Role, User
from accounts.services import membership_set

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery"


def code_of(device: TOTPDevice, *, steps_ahead: int = 0) -> str:
    """The code the authenticator app shows ``steps_ahead`` 30-s steps from now (a step is
    accepted once: a second login in the same step uses the next one, within the tolerance)."""
    device.refresh_from_db()
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time() + steps_ahead * device.step
    return f"{totp.token():06d}"


def wrong(code: str) -> str:
    return f"{(int(code) + 500_000) % 1_000_000:06d}"


def enrolled(user: User) -> tuple[TOTPDevice, list[str]]:
    """``user`` with two-factor on, through the services the pages use."""
    device = twofactor.enrollment_start(user=user)
    codes = twofactor.enrollment_confirm(user=user, code=code_of(device))
    assert codes is not None
    device.refresh_from_db()
    return device, codes


def password_step(client: Client, email: str, path: str = "/login/", **extra: str):
    return client.post(path, {"username": email, "password": PASSWORD, **extra})


def test_enrolling_shows_a_qr_code_and_the_secret_then_recovery_codes_once(member_client):
    client, user, _ = member_client(Role.OWNER)
    assert "Off." in client.get("/account/security/").content.decode()
    assert client.post("/account/security/setup/start/")["Location"] == "/account/security/setup/"
    page = client.get("/account/security/setup/")
    assert page["Cache-Control"] == "no-store"
    html = page.content.decode()
    assert '<svg width="200" height="200"' in html and "<path" in html  # drawn here, inline
    device = TOTPDevice.objects.get(user=user, confirmed=False)
    secret = re.search(r'data-testid="totp-secret">([A-Z2-7 ]+)<', html)
    assert secret is not None
    assert twofactor.secret_base32(device) == secret.group(1)
    assert not twofactor.enabled(user=user)

    refused = client.post("/account/security/setup/", {"code": wrong(code_of(device))})
    assert "That code is not right" in refused.content.decode()
    assert not twofactor.enabled(user=user)

    device.throttle_reset()  # django-otp waits a second after a wrong code
    confirmed = client.post("/account/security/setup/", {"code": code_of(device)})
    assert confirmed["Location"] == "/account/security/recovery-codes/"
    assert twofactor.enabled(user=user)
    shown = client.get("/account/security/recovery-codes/")
    codes = re.findall(r"<li><code>([a-z2-7]{8})</code></li>", shown.content.decode())
    assert len(codes) == twofactor.RECOVERY_CODE_COUNT
    assert sorted(codes) == sorted(StaticToken.objects.values_list("token", flat=True))
    # Shown once: a reload goes back to the security page.
    assert client.get("/account/security/recovery-codes/")["Location"] == "/account/security/"
    assert "On." in client.get("/account/security/").content.decode()


def test_login_needs_the_code_after_the_password_and_logs_in_only_then(make_user, make_org):
    user = make_user("ada@example.com")
    org = make_org("Acme", owner=user)
    device, _ = enrolled(user)
    client = Client()
    response = password_step(client, user.email, next=f"/o/{org.slug}/keys/")
    assert response["Location"] == "/login/code/"
    assert "_auth_user_id" not in client.session  # not logged in after the password alone
    assert client.get(f"/o/{org.slug}/")["Location"].startswith("/login/")
    page = client.get("/login/code/")
    assert page.status_code == 200 and "Authentication code" in page.content.decode()

    refused = client.post("/login/code/", {"code": wrong(code_of(device, steps_ahead=1))})
    assert refused.status_code == 200 and "That code is not right" in refused.content.decode()
    assert "_auth_user_id" not in client.session

    device.throttle_reset()
    done = client.post("/login/code/", {"code": code_of(device, steps_ahead=1)})
    assert done["Location"] == f"/o/{org.slug}/keys/"
    assert client.session["_auth_user_id"] == str(user.pk)
    assert client.get(f"/o/{org.slug}/").status_code == 200


def test_a_used_code_is_refused_a_second_time(make_user):
    user = make_user("ada@example.com")
    device, _ = enrolled(user)
    code = code_of(device, steps_ahead=1)
    first = Client()
    password_step(first, user.email)
    assert first.post("/login/code/", {"code": code}).status_code == 302
    second = Client()
    password_step(second, user.email)
    assert "That code is not right" in second.post("/login/code/", {"code": code}).content.decode()


def test_a_recovery_code_logs_in_once(make_user):
    user = make_user("ada@example.com")
    _, codes = enrolled(user)
    client = Client()
    password_step(client, user.email)
    assert client.post("/login/code/", {"code": codes[0].upper()}).status_code == 302
    assert twofactor.recovery_codes_left(user=user) == twofactor.RECOVERY_CODE_COUNT - 1
    client.logout()
    password_step(client, user.email)
    again = client.post("/login/code/", {"code": codes[0]})
    assert again.status_code == 200 and "_auth_user_id" not in client.session


def test_without_the_password_step_the_code_page_sends_back_to_login(make_user):
    user = make_user("ada@example.com")
    device, _ = enrolled(user)
    client = Client()
    assert client.post("/login/code/", {"code": code_of(device, steps_ahead=1)})[
        "Location"
    ].startswith("/login/")
    password_step(client, user.email)
    session = client.session
    session["2fa.pending"]["at"] -= 301  # the code step expired
    session.save()
    response = client.post("/login/code/", {"code": code_of(device, steps_ahead=1)})
    assert response["Location"] == "/login/" and "_auth_user_id" not in client.session


def test_wrong_codes_count_towards_the_login_lockout(make_user):
    user = make_user("carol@example.com")
    device, _ = enrolled(user)
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    password_step(attacker, user.email)
    statuses = []
    for _ in range(settings.AXES_FAILURE_LIMIT):
        device.throttle_reset()  # take django-otp's own wait away: only axes is tested here
        statuses.append(attacker.post("/login/code/", {"code": "000000"}).status_code)
    assert statuses == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429]
    device.throttle_reset()
    locked = attacker.post("/login/code/", {"code": code_of(device, steps_ahead=1)})
    assert locked.status_code == 429 and "_auth_user_id" not in attacker.session
    # The password step is locked for that pair too.
    assert password_step(Client(REMOTE_ADDR="203.0.113.7"), user.email).status_code == 429


def test_turning_it_off_and_new_recovery_codes_need_a_code(make_user, make_org):
    user = make_user("ada@example.com")
    make_org("Acme", owner=user)
    device, codes = enrolled(user)
    client = Client()
    client.force_login(user)
    assert client.post("/account/security/disable/", {"code": "000000"}).status_code == 302
    assert twofactor.enabled(user=user)
    fresh = client.post("/account/security/recovery-codes/new/", {"code": codes[1]})
    assert fresh["Location"] == "/account/security/recovery-codes/"
    new_codes = re.findall(
        r"<li><code>([a-z2-7]{8})</code></li>",
        client.get("/account/security/recovery-codes/").content.decode(),
    )
    assert len(new_codes) == twofactor.RECOVERY_CODE_COUNT and codes[2] not in new_codes
    assert twofactor.verify(user=user, code=codes[2]) is None  # the old codes stopped working
    device.throttle_reset()
    off = client.post("/account/security/disable/", {"code": code_of(device, steps_ahead=1)})
    assert off.status_code == 302 and not twofactor.enabled(user=user)
    assert not StaticToken.objects.filter(device__user=user).exists()
    # Without two-factor the password logs in again.
    client.logout()
    assert password_step(client, user.email)["Location"] == "/"


def test_owners_are_offered_two_factor_on_the_overview_until_they_turn_it_on(member_client):
    owner_client, owner, org = member_client(Role.OWNER)
    assert 'data-testid="offer-2fa"' in owner_client.get(f"/o/{org.slug}/").content.decode()
    member = User.objects.create_user(email="m@example.com", password=PASSWORD, email_verified=True)
    membership_set(organization=org, user=member, role=Role.MEMBER)
    member_client_ = Client()
    member_client_.force_login(member)
    assert 'data-testid="offer-2fa"' not in member_client_.get(f"/o/{org.slug}/").content.decode()
    enrolled(owner)
    assert 'data-testid="offer-2fa"' not in owner_client.get(f"/o/{org.slug}/").content.decode()


def test_the_admin_login_asks_staff_with_an_authenticator_for_the_code(make_user):
    staff = make_user("ops@example.com")
    staff.is_staff = staff.is_superuser = True
    staff.save()
    device, _ = enrolled(staff)
    client = Client()
    response = password_step(client, staff.email, path="/admin/login/", next="/admin/")
    assert response["Location"] == "/login/code/"
    assert client.get("/admin/")["Location"].startswith("/admin/login/")
    done = client.post("/login/code/", {"code": code_of(device, steps_ahead=1)})
    assert done["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200


def test_an_admin_session_from_before_two_factor_was_turned_on_is_logged_out(make_user):
    staff = make_user("ops@example.com")
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client = Client()
    client.force_login(staff)
    assert client.get("/admin/").status_code == 200  # no authenticator: the password is enough
    enrolled(staff)
    response = client.get("/admin/accounts/user/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=%2Fadmin%2Faccounts%2Fuser%2F"
    assert "_auth_user_id" not in client.session


def test_the_admin_login_still_refuses_non_staff(make_user):
    user = make_user("ada@example.com")
    client = Client()
    response = password_step(client, user.email, path="/admin/login/", next="/admin/")
    assert response.status_code == 200  # the admin's form again, with its error
    assert "staff account" in response.content.decode()
    assert "_auth_user_id" not in client.session
