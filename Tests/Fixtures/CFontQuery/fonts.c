#include "CFontQuery.h"

#include <fontconfig/fontconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/// Appends `text` and a newline to the growing buffer.
static int append(char **buffer, size_t *length, const char *prefix, const char *text) {
    size_t more = strlen(prefix) + strlen(text) + 1;
    char *grown = realloc(*buffer, *length + more + 1);
    if (grown == NULL) return 0;
    *buffer = grown;
    sprintf(*buffer + *length, "%s%s\n", prefix, text);
    *length += more;
    return 1;
}

char *font_query(const char *prefix) {
    if (!FcInit()) return NULL;
    char *buffer = calloc(1, 1);
    size_t length = 0;
    if (buffer == NULL) return NULL;
    FcPattern *pattern = FcPatternCreate();
    FcObjectSet *objects = FcObjectSetBuild(FC_FILE, (char *)NULL);
    FcFontSet *fonts = (pattern && objects) ? FcFontList(NULL, pattern, objects) : NULL;
    for (int i = 0; fonts && i < fonts->nfont; i++) {
        FcChar8 *file = NULL;
        if (FcPatternGetString(fonts->fonts[i], FC_FILE, 0, &file) == FcResultMatch
            && strncmp((const char *)file, prefix, strlen(prefix)) == 0) {
            append(&buffer, &length, "", (const char *)file);
        }
    }
    if (fonts) FcFontSetDestroy(fonts);
    if (objects) FcObjectSetDestroy(objects);
    if (pattern) FcPatternDestroy(pattern);
    FcChar8 *cacheFile = NULL;
    FcCache *cache = FcDirCacheLoad((const FcChar8 *)prefix, NULL, &cacheFile);
    append(&buffer, &length, "cache ", cacheFile ? (const char *)cacheFile : "none");
    if (cacheFile) FcStrFree(cacheFile);
    if (cache) FcDirCacheUnload(cache);
    return buffer;
}
