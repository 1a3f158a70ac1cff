from handler import handle_upload


def test_small_pdf_is_stored():
    assert handle_upload(10_000, "application/pdf") == (201, "stored")


def test_huge_file_is_refused():
    status, message = handle_upload(100 * 1024 * 1024, "image/png")
    assert status == 413 and "too large" in message


def test_unknown_type_is_refused():
    assert handle_upload(10, "text/html")[0] == 415


def test_empty_file_is_not_stored():
    assert handle_upload(0, "image/png")[0] != 201
