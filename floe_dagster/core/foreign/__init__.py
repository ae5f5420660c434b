"""Other systems' maintenance settings (Floe, Polaris, Amoro, S3 Tables) read into policies.
Imports policies and what lies below."""
