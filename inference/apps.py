from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference (the /v1 API)"

    def ready(self) -> None:
        import atexit

        from inference.pipeline import settle_inflight_now

        # A stopping process bills the streams it is still relaying (daphne drops them on
        # SIGTERM without running their cleanup).
        atexit.register(settle_inflight_now)
