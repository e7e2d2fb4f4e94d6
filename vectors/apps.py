from django.apps import AppConfig


class VectorsConfig(AppConfig):
    name = "vectors"
    verbose_name = "Vector store"
    default_auto_field = "django.db.models.BigAutoField"
