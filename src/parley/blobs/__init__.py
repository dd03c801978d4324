"""Blob storage: objects by key in a local directory or any S3-compatible service
(``interface.BlobStore``; built by ``store.build_blob_store`` from ``settings.BlobSettings``)."""
