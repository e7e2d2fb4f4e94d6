from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference (the /v1 API)"
