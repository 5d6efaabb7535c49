"""The S3-compatible ``/s3/`` endpoint (path style, region us-east-1), in modules of one job each:

* ``request``: the raw request as SigV4 sees it (path as sent, query, headers), its bucket, key
  and operation;
* ``auth``: SigV4 (``apps.storage.sigv4``), the credential behind it, and the prefix it grants;
* ``objects``, ``multipart``, ``listing``: the operations, each on the configured store;
* ``http``: what the operations share (context, response shapes, the verified request body);
* ``xml`` and ``errors``: S3's XML bodies and errors;
* ``views``: the one Django view that ties them together;
* ``accesslog``: Daphne's access log with presigned URLs' bearer parameters redacted.
"""
