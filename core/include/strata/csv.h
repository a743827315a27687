/*
 * The one CSV reader and writer of the C core (results of replay/sim and
 * sweeps, study tables, routing-log import): RFC 4180 as pandas reads and
 * writes it, one record per line.  Studies' derived tables are written by
 * the Lua prelude's strata.write_csv with the same quoting rule.
 *
 * Why not Debian's libcsv: it is not installed on the CI image, the GPU
 * machine's build dependencies are a fixed list of packages without it
 * (shared/device/fetch-debs.sh), and what Strata needs is this page: a
 * quoting writer and an in-place splitter that never allocates (the import
 * splits millions of lines).  A multi-line quoted field is not supported:
 * no writer here produces one (newlines in messages are written as " | ").
 */
#ifndef STRATA_CSV_H
#define STRATA_CSV_H

#include <stddef.h>
#include <stdio.h>

/* Write s as one field: as is, or in double quotes (a quote doubled) when it
 * holds the separator ',', a quote or a line break, or is empty; a line
 * break inside becomes " | " so a record stays on one line. */
void strata_csv_write_field(FILE *f, const char *s);

/* Split one record in place: fields separated by sep, a field that starts
 * with '"' runs to the closing quote ("" is a quote; text after the closing
 * quote up to sep is dropped); a trailing "\n" or "\r\n" is removed.
 * Stores up to max field pointers (into line) and returns the number of
 * fields, never more than 1 + the number of sep bytes in line (size fields
 * by that), or -1 on an unterminated quote (*bad, if not NULL, then points
 * at that field's text). */
int strata_csv_split(char *line, char sep, char **fields, size_t max, char **bad);

#endif
