"""Browser pages for jobs, the submit form and team quotas."""
