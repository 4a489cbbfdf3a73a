"""The media plane: DVPP picture descriptions, channels and VPC image processing (acl.media).

It sits above the compute plane (whose handle table and stream work it reuses) and below the
checks: the runtime makes it on first use through ``Runtime.extension`` without importing it.
Pixels are computed with numpy (and Pillow for resizing), imported only when work runs.
"""
