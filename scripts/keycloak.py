#!/usr/bin/env python3
"""Keycloak as the OpenID Connect provider of Coffer's web identities: a realm with one
confidential client and its users, their tokens (with the session tags an administrator
gave a user), and the thumbprint of the realm's signing certificate, through Keycloak's
REST API (standard library only).

As a module, it is what the boto3 suite's `web_identity` step uses against the Keycloak its
test starts. As a script, it starts Keycloak for trying web identities by hand or for Ceph's
s3-tests (whose `[webidentity]` section it prints):

    python3 scripts/keycloak.py [--port 8080] [--realm coffer] [--host localhost]

It installs Keycloak first if needed (`ensure_keycloak` in scripts/setup.sh), runs it in dev
mode (its database in a new temporary directory) on 127.0.0.1:PORT under /auth (its
management interface on PORT+1000) until Ctrl-C, with tokens that live 8 hours. The user's
token carries the session tags s3-tests' tag tests expect (Department: Engineering and
Marketing).
"""

import argparse
import base64
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The user attribute that holds a user's session tags, and the claim it becomes in tokens
# (AWS's name; Keycloak reads an unescaped dot as nesting).
TAGS_ATTRIBUTE = "aws_session_tags"
TAGS_CLAIM = "https://aws.amazon.com/tags"


class Keycloak:
    """Keycloak's REST API at `base` (`http://HOST:PORT/auth`), as its bootstrap admin."""

    def __init__(self, base, admin_user, admin_password):
        self.base = base.rstrip("/")
        self.login = {"grant_type": "password", "client_id": "admin-cli", "username": admin_user,
                      "password": admin_password}
        self.admin_token()

    def admin_token(self):
        """A fresh token of the admin (the master realm's tokens live a minute)."""
        return self.call("POST", "/realms/master/protocol/openid-connect/token", token=False,
                         form=self.login)["access_token"]

    def call(self, method, path, body=None, form=None, token=True):
        """One call, with a JSON body or a form, as the admin unless `token` is false; the
        JSON answered, if any."""
        headers, data = {}, None
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if token:
            headers["Authorization"] = "Bearer " + self.admin_token()
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(request, timeout=60) as answer:
            text = answer.read()
        return json.loads(text) if text else None

    def make_realm(self, realm, client_id, secret, user, token_seconds=300, tags=None):
        """A realm with a confidential client `client_id` (client credentials and password
        grants, its id in its tokens' audience, users' session tags in their tokens) and a
        user `user` with session tags `tags` (see `add_user`); both with `secret` as their
        secret. Its issuer URL."""
        self.call("POST", "/admin/realms", {
            "realm": realm, "enabled": True, "accessTokenLifespan": token_seconds,
            "clients": [{
                "clientId": client_id, "enabled": True, "publicClient": False, "secret": secret,
                "serviceAccountsEnabled": True, "directAccessGrantsEnabled": True,
                "standardFlowEnabled": False,
                "protocolMappers": [{
                    "name": "audience", "protocol": "openid-connect",
                    "protocolMapper": "oidc-audience-mapper",
                    "config": {"included.client.audience": client_id, "access.token.claim": "true",
                               "id.token.claim": "true"}}, {
                    "name": "session tags", "protocol": "openid-connect",
                    "protocolMapper": "oidc-usermodel-attribute-mapper",
                    "config": {"user.attribute": TAGS_ATTRIBUTE,
                               "claim.name": TAGS_CLAIM.replace(".", "\\."),
                               "jsonType.label": "JSON", "access.token.claim": "true",
                               "id.token.claim": "true"}}]}]})
        # Attributes the user profile does not declare, such as the tags, are kept when an
        # administrator sets them; users cannot set their own.
        profile = self.call("GET", f"/admin/realms/{realm}/users/profile")
        profile["unmanagedAttributePolicy"] = "ADMIN_EDIT"
        self.call("PUT", f"/admin/realms/{realm}/users/profile", profile)
        self.add_user(realm, user, secret, tags)
        return f"{self.base}/realms/{realm}"

    def add_user(self, realm, user, secret, tags=None):
        """A user `user` of `realm` with password `secret`, whose tokens carry the session
        tags `tags` ({KEY: [VALUE, ...]}) if given."""
        attributes = {}
        if tags:
            attributes[TAGS_ATTRIBUTE] = [json.dumps({"principal_tags": tags})]
        self.call("POST", f"/admin/realms/{realm}/users", {
            "username": user, "enabled": True, "email": f"{user}@example.com", "emailVerified": True,
            "firstName": user.capitalize(), "lastName": "Test", "attributes": attributes,
            "credentials": [{"type": "password", "value": secret, "temporary": False}]})

    def remove_realm(self, realm):
        self.call("DELETE", f"/admin/realms/{realm}")

    def tokens(self, realm, client_id, secret, user):
        """The client's own access token (client credentials) and the user's (password)."""
        path = f"/realms/{realm}/protocol/openid-connect/token"
        service = self.call("POST", path, token=False, form={
            "grant_type": "client_credentials", "client_id": client_id,
            "client_secret": secret})["access_token"]
        person = self.call("POST", path, token=False, form={
            "grant_type": "password", "client_id": client_id, "client_secret": secret,
            "username": user, "password": secret, "scope": "openid"})["access_token"]
        return service, person

    def thumbprint(self, realm):
        """The SHA-1 thumbprint, in hex, of the certificate of the realm's RS256 signing key."""
        keys = self.call("GET", f"/realms/{realm}/protocol/openid-connect/certs", token=False)["keys"]
        signing = [k for k in keys if k.get("use") == "sig" and k.get("alg") == "RS256"][0]
        return hashlib.sha1(base64.b64decode(signing["x5c"][0])).hexdigest()


def claims(token):
    """A JWT's payload, unverified."""
    return json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))


def interrupted(_signal, _frame):
    raise KeyboardInterrupt


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--realm", default="coffer")
    parser.add_argument("--host", default="localhost",
                        help="the name tokens are asked for under: it becomes their issuer's")
    args = parser.parse_args()
    setup = f"source {ROOT}/scripts/setup.sh && ensure_keycloak && echo ${{COFFER_KEYCLOAK:-/var/tmp/coffer-keycloak/keycloak-$KEYCLOAK_VERSION}}"
    home = subprocess.run(["bash", "-c", setup], check=True, capture_output=True, text=True).stdout.strip()
    password = secrets.token_hex(12)
    environment = {**os.environ, "KC_BOOTSTRAP_ADMIN_USERNAME": "admin",
                   "KC_BOOTSTRAP_ADMIN_PASSWORD": password}
    # Its own database (dev-mem's loses its tables once its pool sits idle a while).
    database = tempfile.mkdtemp(prefix="coffer-keycloak-")
    # Stopped by a signal as by Ctrl-C: Keycloak goes with it, and its database.
    signal.signal(signal.SIGTERM, interrupted)
    server = subprocess.Popen(
        [f"{home}/bin/kc.sh", "start-dev", "--db=dev-file",
         f"--db-url=jdbc:h2:file:{database}/keycloakdb;NON_KEYWORDS=VALUE", "--http-relative-path=/auth",
         "--http-host=127.0.0.1", f"--http-port={args.port}",
         f"--http-management-port={args.port + 1000}"],
        env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://{args.host}:{args.port}/auth"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                keycloak = Keycloak(base, "admin", password)
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit(f"Keycloak did not come up at {base}")
                time.sleep(1)
        client_id, secret, user = "coffer-app", secrets.token_hex(16), "tester"
        keycloak.make_realm(args.realm, client_id, secret, user, token_seconds=8 * 3600,
                            tags={"Department": ["Engineering", "Marketing"]})
        service, person = keycloak.tokens(args.realm, client_id, secret, user)
        own = claims(service)
        print(f"Keycloak {base}, admin password {password}; realm {args.realm}, client {client_id},"
              f" user {user}, secret {secret}\n")
        print("[webidentity]")
        print(f"thumbprint = {keycloak.thumbprint(args.realm)}")
        print(f"KC_REALM = {args.realm}")
        print(f"aud = {client_id}")
        print(f"sub = {own['sub']}")
        print(f"azp = {own['azp']}")
        print(f"token = {service}")
        print(f"user_token = {person}", flush=True)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(database, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
