// What the fixture service's fontconfig knows, for the security suite's font tests: the same
// fontconfig (and configuration, FONTCONFIG_FILE) that Pango matches fonts through.
#ifndef REMOTEVIEW_CFONTQUERY_H
#define REMOTEVIEW_CFONTQUERY_H

/// The files of the fonts fontconfig lists (`FcFontList`) whose path starts with `prefix`, one
/// per line, in fontconfig's order; then a line `cache PATH`: the cache file
/// `FcDirCacheLoad` loads for the folder `prefix`, or `cache none`. Free the result with `free`.
char *_Nullable font_query(const char *_Nonnull prefix);

#endif
