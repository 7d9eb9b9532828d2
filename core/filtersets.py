"""What the portal's FilterSets share (the web lists and the API's query strings use the same ones)."""

from __future__ import annotations


class FormClassBuiltOnce:
    """For a django-filter FilterSet: its form class is built once per FilterSet class, not once a request.

    django-filter builds the form class in ``get_form_class``, the hook its docstring says to override when the
    form class needs customising: it makes every filter's form field and a new ``Form`` subclass of them for each
    FilterSet instance, so for each request of a list. The class depends only on the FilterSet's class, unless a
    filter's choices come from the request (a callable ``queryset``): such a FilterSet builds it each time, as
    django-filter does. Each form still gets copies of the fields (Django's ``Form`` deep-copies its class's
    fields for every instance), so no request reads or changes another's."""

    def get_form_class(self):
        cls = type(self)
        built = cls.__dict__.get("_form_class_built_once")
        if built is None:
            built = super().get_form_class()
            if not any(callable(getattr(f, "queryset", None)) for f in self.filters.values()):
                cls._form_class_built_once = built
        return built
