"""Regenerate the sample PDFs in examples/kb/pdf (run from the repository root).

* ``architecture.pdf``: a two-page text PDF with headings.
* ``scanned-policy.pdf``: the same kind of page rendered to an image, with no
  text layer, so indexing it needs OCR.

The outputs are committed; this script documents how they were made.
"""

from pathlib import Path

import pymupdf

OUT = Path(__file__).parent / "kb" / "pdf"

ARCHITECTURE = [
    [
        ("Billing platform architecture", 20, True),
        ("Overview", 14, True),
        ("The billing platform turns usage events into invoices. Events arrive on the ingest API, are "
         "validated, and are written to the usage ledger within five seconds.", 11, False),
        ("Components", 14, True),
        ("The rating engine prices each usage event against the customer's plan. The invoice service "
         "aggregates rated events at the end of each billing cycle and renders the PDF invoice.", 11, False),
    ],
    [
        ("Data retention", 14, True),
        ("Raw usage events are kept for 13 months. Rated events and invoices are kept for 7 years to "
         "satisfy tax audits. Deleting a customer removes raw events within 30 days.", 11, False),
        ("Failure handling", 14, True),
        ("If the rating engine is unavailable, events queue in the ledger and are rated when it returns; "
         "invoices are never generated from partially rated cycles.", 11, False),
    ],
]

POLICY = [
    ("Expense policy (scanned copy)", 18),
    ("Travel must be booked through the corporate portal.", 12),
    ("Hotel stays are reimbursed up to 180 USD per night.", 12),
    ("Meals are reimbursed up to 60 USD per day with receipts.", 12),
    ("Claims must be filed within 30 days of the trip.", 12),
]


def write_lines(page, lines, y=72):
    for text, size, *_ in lines:
        rect = pymupdf.Rect(72, y, page.rect.width - 72, page.rect.height - 72)
        font = "helv" if size < 14 else "hebo"
        used = page.insert_textbox(rect, text, fontsize=size, fontname=font)
        height = rect.height - used if used >= 0 else 0
        y += height + size * 0.8
    return y


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    doc = pymupdf.open()
    for lines in ARCHITECTURE:
        write_lines(doc.new_page(), lines)
    doc.set_metadata({"title": "Billing platform architecture", "creator": "freshindex examples"})
    doc.save(OUT / "architecture.pdf", garbage=4, deflate=True, no_new_id=True)

    src = pymupdf.open()
    write_lines(src.new_page(), [(t, s) for t, s in POLICY])
    pix = src[0].get_pixmap(dpi=150, colorspace=pymupdf.csGRAY)
    scanned = pymupdf.open()
    page = scanned.new_page(width=src[0].rect.width, height=src[0].rect.height)
    page.insert_image(page.rect, pixmap=pix)
    scanned.set_metadata({"title": "", "creator": "freshindex examples (scan)"})
    scanned.save(OUT / "scanned-policy.pdf", garbage=4, deflate=True, no_new_id=True)


if __name__ == "__main__":
    main()
