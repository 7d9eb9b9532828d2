import uuid

from asgiref.local import Local

_current = Local()


def current_request_id() -> str:
    """The id of the request being served on this thread ('' outside a request), for the audit log."""
    return getattr(_current, "request_id", "")


class RequestIdMiddleware:
    """Gives every request an id (or keeps a sane incoming X-Request-ID) and echoes it in the response."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if 8 <= len(incoming) <= 64 and incoming.replace("-", "").isalnum() else uuid.uuid4().hex
        request.request_id = request_id
        _current.request_id = request_id
        try:
            response = self.get_response(request)
        finally:
            _current.request_id = ""
        response["X-Request-ID"] = request_id
        return response
