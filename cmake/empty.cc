// Placeholder translation unit for a library stage that has no sources yet.
