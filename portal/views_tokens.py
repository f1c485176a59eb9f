"""The signed-in user's API tokens: list, create (plain token shown once), revoke.

- ``/account/tokens/`` (``api_tokens``): GET lists the user's own tokens and the create form;
  a valid POST issues a token and renders the plain token in that response only (no redirect,
  nothing in the URL, session or messages), with ``Cache-Control: no-store``.
- ``/account/tokens/<token_key>/revoke/`` (``api_token_revoke``): GET asks for confirmation,
  POST (CSRF) deletes the token, which stops it at once. Another user's token is a 404.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from portal.forms import ApiTokenForm
from portal.models import ApiToken


def _own_tokens(request: HttpRequest) -> list[ApiToken]:
    return list(ApiToken.objects.filter(user=request.user).order_by("-created", "token_key"))


@never_cache
@require_http_methods(["GET", "POST"])
def api_tokens(request: HttpRequest) -> HttpResponse:
    """List the user's tokens and create one.

    Context: ``tokens`` (newest first), ``form`` (``ApiTokenForm``), and after a successful
    create ``new_token`` (the plain token, rendered once) and ``new_token_obj``. An invalid
    POST re-renders the form with its errors (200) and creates nothing.
    """
    context: dict[str, object] = {}
    if request.method == "POST":
        form = ApiTokenForm(request.user, data=request.POST)
        if form.is_valid():
            instance, plain = form.save()
            context.update(new_token=plain, new_token_obj=instance)
            form = ApiTokenForm(request.user)
    else:
        form = ApiTokenForm(request.user)
    context.update(form=form, tokens=_own_tokens(request))
    return render(request, "portal/api_tokens.html", context)


@never_cache
@require_http_methods(["GET", "POST"])
def api_token_revoke(request: HttpRequest, token_key: str) -> HttpResponse:
    """Confirm (GET) and revoke (POST) one of the user's own tokens.

    Raises:
        Http404: no token of this user has ``token_key`` (another user's token included).
    """
    tokens = ApiToken.objects.filter(user=request.user, token_key=token_key)
    token = tokens.first()
    if token is None:
        raise Http404(_("No such API token."))
    if request.method == "POST":
        # token_key is a 15-character random prefix; should two of one user's tokens ever
        # share it, revoking both is the safe side.
        tokens.delete()
        messages.success(
            request, _("Token “%(name)s” (%(key)s…) revoked.") % {"name": token.name, "key": token.token_key}
        )
        return HttpResponseRedirect(reverse("api_tokens"))
    return render(request, "portal/api_token_revoke.html", {"token": token})
