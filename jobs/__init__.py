"""Job and notebook lifecycle (submission, admission, placement, reconcile). Models arrive with the jobs
capability; the app is registered now so its URL space and migrations have a home."""
