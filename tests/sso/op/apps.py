from django.apps import AppConfig


class TestProviderConfig(AppConfig):
    name = "tests.sso.op"
    label = "test_op"
    verbose_name = "Test OpenID provider"
